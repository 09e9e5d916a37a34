"""Examples beside the library: the demo, simulators, synthetic stores and doc generators.

Installed with toolkit (so `toolkit demo` and the `sim-gfs` dataset work) and above the jobs,
which it composes; nothing in the library imports it. Its dependencies beyond the library's are
the `examples` extra (ecCodes, matplotlib). See docs/architecture.md.
"""
