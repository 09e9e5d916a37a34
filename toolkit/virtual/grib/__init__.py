"""GRIB2 sources: index parsing, message boundaries, decoding."""
