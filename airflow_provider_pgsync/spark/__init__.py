"""Spark jobs; they import only pyspark, the standard library and pure modules of this package."""
