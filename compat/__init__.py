"""The client compatibility suite (`make compat`): see run.py."""
