"""The metrics of a run for display: fed by the events file's increments, bounded in memory.

A run of 100,000 steps logs 100,000 points per metric; a terminal plot is about 150 cells
wide. Each `Series` keeps, whatever the run's length:

- a fixed number of buckets over the whole run (a power of two steps each), every bucket
  with its lowest, highest and last point, so a spike or a dip is never averaged away;
- the newest raw points (a ring), so zooming to the last N steps shows every point.

The full data stays on disk in events.jsonl. The store takes the typed events of
backend.contract.events.EventReader (`ingest`), or, much faster for long files, the column batches
of `ColumnReader`, which reads with backend.core.tail and decodes whole blocks at once (msgspec)
instead of building one event per line.
No Textual here: the store is plain Python + numpy and is tested on its own.

The package: `bucket` (one series), `decode` (blocks of events into columns; the file reader),
`store` (the store; whole files). Import from here.
"""

from backend.series.bucket import BUCKETS, SMOOTHING, TAIL_POINTS, Points, Series, ema, thin
from backend.series.decode import BATCH_BYTES, CHUNK_BYTES, LOG_COLUMNS, ColumnReader, EventBatch, decode_block
from backend.series.store import (
    SERIES_NAMES,
    MetricsStore,
    OverflowMarker,
    Throughput,
    load_store,
)

__all__ = [
    "BATCH_BYTES", "BUCKETS", "CHUNK_BYTES", "LOG_COLUMNS", "SERIES_NAMES", "SMOOTHING", "TAIL_POINTS",
    "ColumnReader", "EventBatch", "MetricsStore", "OverflowMarker", "Points", "Series", "Throughput",
    "decode_block", "ema", "load_store", "thin",
]
