"""Shared by the benchmark scripts (not scripts themselves): each module named for what it holds."""
