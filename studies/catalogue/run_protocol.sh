#!/usr/bin/env bash
# The catalogue under the one protocol (records/declarations/catalogue/24-one-protocol-for-every-entry.md).
# Usage: SRC=<git archive of the declaring commit> OUTROOT=<folder> studies/catalogue/run_protocol.sh KEY...
# N_JOBS (default 2) sets --n-jobs; results do not depend on it.
# Each entry goes to $OUTROOT/KEY (resumed when the folder exists), timed by /usr/bin/time -v into
# $OUTROOT/KEY.time, its printed table in $OUTROOT/KEY.out, start and end in $OUTROOT/log.txt.
# Then studies/catalogue/protocol_table.py copies nothing: copy $OUTROOT/KEY into
# records/catalogue_protocol/KEY and run it to write the cross-entry table.
set -u
: "${SRC:?SRC: the git archive of the declaring commit}" "${OUTROOT:?OUTROOT: where the runs go}"
cd "$SRC"
export OMP_NUM_THREADS=1 PYTHONPATH="$SRC" MPLBACKEND=Agg
for KEY in "$@"; do
  OUT=$OUTROOT/$KEY
  RES=""; [ -d "$OUT" ] && RES="--resume"
  echo "== $KEY start $(date -u +%FT%TZ)" >> $OUTROOT/log.txt
  nice -n 10 /usr/bin/time -v -o $OUTROOT/$KEY.time python -m moestat reproduce $KEY --protocol --n-jobs "${N_JOBS:-2}" --quiet --out $OUT $RES > $OUTROOT/$KEY.out 2>&1
  echo "== $KEY rc=$? end $(date -u +%FT%TZ)" >> $OUTROOT/log.txt
done
