"""From a profile to a launch: the exact `accelerate launch ... swift sft ...` command (command.py), the
accelerate/DeepSpeed/FSDP configs (launcher_config.py), the flags the workbench manages (managed_flags.py),
swift's argument schema (swift_schema.py), several nodes (nodes.py) and the pre-launch checks (validate/).
"""
