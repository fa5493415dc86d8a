"""The throughput doctor (#38): where a run's step time goes, honest FLOPs and MFU, and the profile change that
would help. The trainer side (backend/plugin/step_timing.py) writes `step_time` events; this room reads them."""
