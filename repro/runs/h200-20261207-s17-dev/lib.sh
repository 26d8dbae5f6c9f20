# Session 17: what prep.sh, call_all.sh and call_repro.sh share (source it from the repository root).
D=repro/runs/h200-20261207-s17-dev; R=repro/runs/h200-20261206-s16-dev

# Digest of solutions/<$2, default fused_moe> below directory $1 (file paths and contents; __pycache__ left out).
solution_digest() {
  (cd "$1" && find "solutions/${2:-fused_moe}" -type f -not -path '*__pycache__*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
}

# Device side: T0, left() (seconds left of DEADLINE), the MoE wheels, the GPU line as the first of rc.txt.
device_setup() {
  T0=$(date +%s)
  export FIB_SDK_CACHE=/tmp/fibcache AB_PER=${AB_PER:-8}
  eval "$(python3 -m sdk env install --wheels .whl-moe 2>/dev/null)"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/rc.txt
}
left() { echo $(( ${DEADLINE:-585} - ($(date +%s) - T0) )); }
mark() { echo "$* at $(( $(date +%s) - T0 )) s" >> $OUT/rc.txt; }

# The wgmma unit test (gather tiles 4/5 exercise GATHER_A end to end) within $1 seconds; returns its status.
wgmma_test() {
  timeout $1 python3 -m pytest -m gpu -x -q -s tests/test_kernel_fused_moe_wgmma.py > $OUT/wgmma_tests.txt 2>&1
  local rc=$?; mark "wgmma rc $rc"; return $rc
}

# Variant $1 (cand: the checkout itself) as solutions/fused_moe; if its digest is manifest.txt's, the MoE repro
# naming that branch's commit, within the time left. Extra bench arguments: $2...
repro_variant() {
  local W=$1; shift
  if [ "$W" != cand ]; then
    rm -rf solutions/fused_moe && cp -r $R/.variants/$W solutions/fused_moe &&
      sed -i "s/fused_moe_fp8_sm90_$W/fused_moe_fp8_sm90/" solutions/fused_moe/solution/python/main.py
  fi
  local dig=$(solution_digest .) C WANT
  read -r _ C WANT <<< "$(grep "^$W " $D/manifest.txt)"
  mark "variant $W digest $dig want $WANT commit $C"
  [ "$dig" = "$WANT" ] || return 1
  mkdir -p $OUT/tr
  FIB_SDK_COMMIT=$C timeout $(( $(left) - 5 )) python3 -m sdk bench --definitions .official --definition moe \
    --tag ${TAG:-repro} --settings repro/settings.toml --out $OUT --traces $OUT/tr "$@" > $OUT/repro_log.txt 2>&1
  mark "repro rc $?"
}

# Winner $1 (a line "name commit digest" of manifest $2), copied from folder $3 over solutions/$4: if its digest is
# the manifest's, the GPU tests $5, then, with more than REPRO_MIN (default 0) seconds left, the repro of definition
# $6 without peers naming the winner's commit (appended to repro_log.txt).
winner_repro() {
  local W=$1 MAN=$2 SRC=$3 SOL=$4 TESTS=$5 DEF=$6 C WANT DIG RC
  rm -rf solutions/$SOL && cp -r $SRC solutions/$SOL
  read -r _ C WANT <<< "$(grep "^$W " $MAN)"; DIG=$(solution_digest . $SOL)
  mark "$DEF winner $W at $C: digest $DIG want $WANT"
  [ "$DIG" = "$WANT" ] || return 1
  timeout 90 python3 -m pytest -m gpu -q $TESTS > $OUT/tests.txt 2>&1
  RC=$?; mark "$DEF gpu tests rc $RC"
  [ $RC = 0 ] && [ $(left) -gt ${REPRO_MIN:-0} ] || return 1
  mkdir -p $OUT/tr
  FIB_SDK_COMMIT=$C timeout $(( $(left) - 5 )) python3 -m sdk bench --definitions .official --definition $DEF \
    --tag repro --settings repro/settings.toml --out $OUT --traces $OUT/tr --no-peers solutions/$SOL \
    >> $OUT/repro_log.txt 2>&1
  mark "$DEF repro rc $?"
}

# Prep side (CPU, needs .nox/sdk): re-render solution folder $1 from its render.toml.
render_solution() {
  .nox/sdk/bin/python -c "import sys; from pathlib import Path; from sdk import regenerate; regenerate.rewrite(Path(sys.argv[1]))" "$1"
}
# Commit $1 -> digest of its solutions/$2 (the folder is left in /tmp/prep_wt/solutions/$2).
digest_at() {
  rm -rf /tmp/prep_wt && mkdir /tmp/prep_wt && git archive "$1" solutions/$2 | tar -x -C /tmp/prep_wt
  solution_digest /tmp/prep_wt $2
}
# Patch $2 applied to the index, solutions/$1 re-rendered, committed as $3; prints the commit. Only the patch and
# the solution are committed (other edits in the tree stay out of the candidates).
prep_step() {
  git apply --index "$2" && render_solution solutions/$1 && git add -A solutions/$1
  git commit -qm "$3" && git rev-parse --short HEAD
}
# Branch $2 reset to commit $3, solutions/$1/render.toml edited by sed script $4, re-rendered, committed as $5;
# prints the commit.
prep_flip() {
  git checkout -q -B $2 $3 && sed -i "$4" solutions/$1/render.toml && render_solution solutions/$1
  git add -A solutions/$1 && git commit -qm "$5" && git rev-parse --short HEAD
}
