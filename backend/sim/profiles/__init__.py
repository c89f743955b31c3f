"""Derived GPU profiles and workload tables (data only; see NOTICE.md).

A package so that setuptools ships the JSON, licence and notice files with the wheel.
"""
