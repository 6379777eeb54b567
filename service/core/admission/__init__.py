"""The admission steps, one module each; :mod:`service.core.chain` runs them in order."""
