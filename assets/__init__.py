"""Software-defined assets, one module (or subpackage) per pattern family."""
