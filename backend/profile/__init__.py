"""The launch profile: one typed model of everything a fine-tune needs, stored as TOML.

One name to import from; the rooms behind it:
- backend/profile/model.py: the model and its sections (field names follow ms-swift's arguments);
- backend/profile/watch_section.py: the [watch] and [notify] sections (the watch package reads them too);
- backend/profile/toml_file.py: load with every problem named by file, key and line; save atomically,
  only the values that differ from the defaults, keeping the user's comments and key order;
- backend/profile/schema.py: the schema as a table (`workbench schema`, the TUI's help).
"""

from __future__ import annotations

from backend.profile.model import (
    ComputeDtype,
    DataSection,
    DebugSection,
    DeepSpeedSection,
    DistributionSection,
    Dtype,
    FsdpSection,
    LaunchProfile,
    ModelSection,
    OutputSection,
    PrecisionSection,
    RunSection,
    ScalarArg,
    ShardingStrategy,
    TrainingSection,
    TunerSection,
)
from backend.profile.schema import field_help, schema_rows
from backend.profile.toml_file import (
    ALWAYS_WRITTEN,
    MAX_PROFILE_BYTES,
    NESTED_TOO_DEEP,
    ProfileError,
    ProfileProblem,
    find_key_line,
    load_profile,
    parse_profile,
    profile_text_over,
    profile_to_toml,
    save_profile,
)
from backend.profile.watch_section import NotifySection, WatchSection

__all__ = [
    "ALWAYS_WRITTEN", "MAX_PROFILE_BYTES", "NESTED_TOO_DEEP", "ComputeDtype", "DataSection", "DebugSection",
    "DeepSpeedSection", "DistributionSection", "Dtype", "FsdpSection", "LaunchProfile", "ModelSection",
    "NotifySection", "OutputSection", "PrecisionSection", "ProfileError", "ProfileProblem", "RunSection", "ScalarArg",
    "ShardingStrategy", "TrainingSection", "TunerSection", "WatchSection", "field_help", "find_key_line",
    "load_profile", "parse_profile", "profile_text_over", "profile_to_toml", "save_profile", "schema_rows",
]
