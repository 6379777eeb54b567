"""Side-by-side benchmarks of Universal Runtime against the software users would pick instead.

Entry points: ``python -m bench`` (every area) and ``python -m bench.<area>`` for ``generation``,
``embeddings``, ``memory`` and ``overhead``. See ``bench/README.md``.
"""
