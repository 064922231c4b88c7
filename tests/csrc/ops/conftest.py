"""The op tests' `path` fixture: each test that takes it runs once per SIMD path this CPU has."""
from tests.fixtures.simd import path  # noqa: F401
