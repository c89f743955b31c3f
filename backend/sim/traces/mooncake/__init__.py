"""Mooncake FAST'25 request traces (data only; see ../NOTICE.md)."""
