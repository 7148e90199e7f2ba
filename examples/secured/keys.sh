#!/bin/sh
# Makes the keys and allow directories of the secured example, beside its configs (run it from this directory).
# Every process has its own key; each server lists the public keys of the clients it admits.
#   feed     binds the shards;    admits lvc and recorder        (keys/feed-readers)
#   lvc      reads the feed;      admits reader                  (keys/lvc-readers); only feed's key publishes ids 1-2
#   recorder reads the feed;      its history service admits reader (keys/history-readers)
#   reader   subscribes through the LVC and catches up from the recorder
set -eu
tickbox=${TICKBOX:-tickbox}
mkdir -p keys/feed-readers keys/lvc-readers keys/history-readers
for name in feed lvc recorder reader; do
    "$tickbox" keygen "keys/$name"
done
# Public certificates only: a secret never leaves its owner's directory.
cp keys/lvc keys/recorder keys/feed-readers/
cp keys/reader keys/lvc-readers/
cp keys/reader keys/history-readers/
