"""Integration tests: registered marker (skipped unless GPUFLEET_INTEGRATION=1)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs GPUFLEET_INTEGRATION=1 (emulators, aiperf)")
