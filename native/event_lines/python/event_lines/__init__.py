"""Event batch files read for Spark's Python workers (`pieces`), by a Rust library
(`_native`) that splits their lines and reads each event line as Spark reads it; and
texts digested by it (`digests`), for the keys of `user_events`' index."""
