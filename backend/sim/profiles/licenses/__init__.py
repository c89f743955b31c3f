"""Upstream licence texts of the derived data (a package so that the wheel includes them)."""
