"""Exceptions the engine raises for bad input. The CLI turns each into a one-line error."""


class StoreError(Exception):
    """Base class: something about the store or its files is not as expected."""

    exit_code = 2


class NotAStoreError(StoreError):
    """The directory does not look like a RocketMQ store."""


class GeometryError(StoreError):
    """A file's size does not match the configured geometry."""


class CorruptFileError(StoreError):
    """A file's bytes cannot be what the broker writes."""


class StoreLockedError(StoreError):
    """Another process (a broker or another rmqtool) holds the store lock."""

    exit_code = 4


class StoreReadOnlyError(StoreError):
    """The store cannot be written at all (a read-only file system or mount, no write permission): a writer refuses
    (exit 2), which is not the store being locked (exit 4)."""


class UncleanStoreError(StoreError):
    """The abort marker says the last writer did not shut down cleanly."""


class InvalidArgumentError(StoreError):
    """An argument is out of range (limits, time ranges, offsets)."""


class ModeRefusedError(StoreError):
    """A writer cannot write the store's mode (DLedger, RocksDB queues or configs, LMQ ...) exactly as the broker
    does (engine.broker.mode): it refuses before anything is changed."""
