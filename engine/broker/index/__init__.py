"""The broker's index (format §5):

  file        IndexFile: the on-disk hash table (header, slots, items, their sizes), one put, one key lookup
  build       vectorised index writing: a whole file in one pass, a run of puts appended to an open file
  service     IndexService: the index directory as a sequence of files, rolling, flushing
  chain       the one hash-chain walker (broker index files and unsealed tiered index files)
  stats       slot statistics of one file, in bounded chunks
  geometry    the geometry (hash slots, items) read from the files when nothing else gives it, and the one
              geometry rule of every writer of index files (writer_index_geometry)
  compare     two indexes compared by content, file by file (spark-reindex's sameAsBefore)
  keys        which keys a message indexes, broker and tiered (the one statement of both rules)
  keycolumns  the same key rules over thousands of decoded records at once (numpy columns)
  keyquery    query by key, verified against the commit log, and the broker's raw answer
  write       index files built (or compared with a file on disk) a chunk of items at a time
  verify      index file verification: the structural pass, then the items against the commit log in one walk
  inspect     inspect-index: headers, a slot's chain, statistics, verification, one file at a time
"""
