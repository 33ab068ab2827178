"""The tests' event loop is the broker's: uvloop (tests/conftest.py's pytest_asyncio_loop_factories)."""

import asyncio

import uvloop


async def test_async_tests_run_on_uvloop() -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
