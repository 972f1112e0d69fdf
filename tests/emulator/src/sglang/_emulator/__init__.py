"""Implementation of the SGLang emulator (TEST DOUBLE). Private; stdlib only."""
