"""What rmqtool itself leaves in a store, and taking it away again:

  quarantine  everything recover or repair removes, truncates or overwrites, kept first inside the store
  leftovers   the folders rmqtool leaves in a store root, recognised by what they hold
  prune       `rmqtool prune`: removes the quarantine runs and index backups leftovers recognises, under the lock
"""
