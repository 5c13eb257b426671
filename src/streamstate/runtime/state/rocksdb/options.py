"""RocksDB options of the embedded backend: predefined profiles, sizes, raw options.

The profiles follow Flink's ``PredefinedOptions`` (same names, same intent); the
backend always disables the write-ahead log (durability comes from checkpoints)
and keeps per-open thread counts small (see :func:`build_options`).
"""

from __future__ import annotations

from typing import Any

from rocksdict import BlockBasedOptions, Cache, Options

from streamstate.errors import ConfigurationError

__all__ = ["PROFILES", "build_options"]

#: profile name -> settings applied to rocksdict ``Options`` (Flink's PredefinedOptions)
PROFILES: dict[str, dict[str, Any]] = {
    "DEFAULT": {},
    "SPINNING_DISK_OPTIMIZED": {
        "parallelism": 4,
        "level_compaction_dynamic_level_bytes": True,
        "min_write_buffer_number_to_merge": 3,
        "max_write_buffer_number": 4,
        "max_open_files": -1,
    },
    "SPINNING_DISK_OPTIMIZED_HIGH_MEM": {
        "parallelism": 4,
        "level_compaction_dynamic_level_bytes": True,
        "target_file_size_base": 256 * 1024 * 1024,
        "max_bytes_for_level_base": 1024 * 1024 * 1024,
        "write_buffer_size": 64 * 1024 * 1024,
        "min_write_buffer_number_to_merge": 3,
        "max_write_buffer_number": 4,
        "max_open_files": -1,
        "block_cache_size": 256 * 1024 * 1024,
        "block_size": 128 * 1024,
        "bloom_filter": True,
    },
    "FLASH_SSD_OPTIMIZED": {"parallelism": 4, "max_open_files": -1},
}


def build_options(
    predefined_options: str = "DEFAULT",
    write_buffer_size: int | None = None,
    block_cache_size: int | None = None,
) -> Options:
    """rocksdict ``Options`` for one database (raw mode, created if missing).

    ``write_buffer_size`` / ``block_cache_size`` (bytes) override the profile's.
    """
    profile = PROFILES.get(str(predefined_options).upper())
    if profile is None:
        raise ConfigurationError(
            f"unknown predefined RocksDB options {predefined_options!r}; accepted: "
            f"{', '.join(PROFILES)}"
        )
    settings = dict(profile)
    if write_buffer_size is not None:
        settings["write_buffer_size"] = write_buffer_size
    if block_cache_size is not None:
        settings["block_cache_size"] = block_cache_size
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    # Opening a database spawns max_file_opening_threads threads (default 16) and each
    # open/close syncs several metadata files; on a small shared machine the threads made
    # every open cost tens of ms. One thread suffices for a new or small database.
    o.set_max_file_opening_threads(1)
    o.set_stats_dump_period_sec(0)
    o.set_keep_log_file_num(1)
    o.set_max_background_jobs(2)  # Flink's state.backend.rocksdb.thread.num default
    if "parallelism" in settings:
        o.increase_parallelism(settings["parallelism"])
        o.set_max_background_jobs(settings["parallelism"])
    if settings.get("level_compaction_dynamic_level_bytes"):
        o.set_level_compaction_dynamic_level_bytes(True)
    for name in (
        "min_write_buffer_number_to_merge",
        "max_write_buffer_number",
        "max_open_files",
        "target_file_size_base",
        "max_bytes_for_level_base",
        "write_buffer_size",
    ):
        if name in settings:
            getattr(o, "set_" + name)(settings[name])
    if "block_cache_size" in settings or "block_size" in settings or "bloom_filter" in settings:
        bb = BlockBasedOptions()
        if "block_cache_size" in settings:
            bb.set_block_cache(Cache(settings["block_cache_size"]))
        if "block_size" in settings:
            bb.set_block_size(settings["block_size"])
        if settings.get("bloom_filter"):
            bb.set_bloom_filter(10, False)
        o.set_block_based_table_factory(bb)
    return o
