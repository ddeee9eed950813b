"""The DLedger commit log (enableDLegerCommitLog=true): DLedger's entry log around the same message records.

  entry   the entry codec: the 48-byte header, the padding entry, the index unit, their checks (DLedger 0.3.1.2)
  log     DLedgerLog, the entry log read as a commit log (every reader works on it unchanged); open_log, the
          commit log a store's mode says
  index   the index files (dledger-<id>/index), DLedger's checkpoint, and the whole-log check (doctor)
"""
