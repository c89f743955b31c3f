"""Azure LLM inference traces 2023 (data only; see ../NOTICE.md)."""
