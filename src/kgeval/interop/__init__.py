"""Models trained elsewhere: adapters and converters (pykeen, ...); each module imports its
library only when used."""
