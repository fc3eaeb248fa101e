"""The application layer: the one pipeline that runs a workload on a config.

Every front door (``archsim run``/``compare``/``sweep``/``validate``/``llm``,
``archsim.estimate``, :mod:`serving`) builds a :class:`Workload` and calls :func:`run`.
"""
