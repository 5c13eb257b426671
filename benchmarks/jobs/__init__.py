"""The user functions of benchmark jobs, apart from the benchmarks' driver code (each
subtask host imports the module of its job's functions)."""
