"""Kernels: each turns one planned :class:`~compiler.plan.Kernel` into commands."""
