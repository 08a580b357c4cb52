#!/usr/bin/env bash
# Prepare HERE what the GPU check needs on a lent device machine (no internet there): the wheels of the packages
# lenscope's CLI imports that the device's image lacks (SQLAlchemy, captum, gguf, pinned as in requirements.txt) and
# the embedded GGUF (98 MB), cut into parts. Every `run` call sends the working tree (tracked and untracked files
# that git does not ignore) plus its carried paths, 64 MiB at most, so each call carries one folder .gpu/callK with
# one part (.gpu/call1 also the wheels), sized to what the tree leaves. The device keeps the ignored files of earlier
# calls while it stays warm (30 s after a call), so the calls go back to back; scripts/gpu_check.sh (run THERE)
# reassembles the GGUF once every part is there and runs `python -m lenscope benchmark gpu --device cuda`.
#
# Usage, from the repository root: bash scripts/gpu_bundle.sh   (needs .gpu/ ignored: `/.gpu/` in .gitignore or
# .git/info/exclude). It prints the calls to make. With the tree at 28.8 MiB (December 2026) they are three:
#   run(command="bash scripts/gpu_check.sh", carry=[".gpu/call1"], timeout_s=120)   # part 1, wheels; a preflight
#   run(command="bash scripts/gpu_check.sh", carry=[".gpu/call2"], timeout_s=120)   # part 2
#   run(command="bash scripts/gpu_check.sh", carry=[".gpu/call3"], timeout_s=570)   # part 3: the check (< 8 min)
# The figures come back as $OUT/gpu.json and $OUT/gpu.log (the last line sums up).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PY=${PYTHON:-python3}
LIMIT=$((64 << 20))   # what one call may send
SLACK=$((2 << 20))    # for files added to the tree between this script and the calls
git check-ignore -q .gpu/x || { echo "gpu_bundle: .gpu/ is not ignored; add /.gpu/ to .gitignore or .git/info/exclude" >&2; exit 2; }

rm -rf .gpu && mkdir -p .gpu/call1/whl
pins=$(grep -iE '^(sqlalchemy|captum|gguf)==' requirements.txt)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu/call1/whl $pins
for whl in .gpu/call1/whl/*.whl; do  # their own needs (all in the device's image: see KINDS.md)
  echo "$(basename "$whl") needs: $(unzip -p "$whl" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v extra \
    | cut -d' ' -f2- | tr '\n' ' ')"
done

gguf=$("$PY" -c 'from lenscope.models.sources import embedded_gguf_path; print(embedded_gguf_path())')
size=$(stat -c %s "$gguf")
tree=$({ git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null || true; } \
  | awk '{s += $1} END {print s + 0}')
room=$((LIMIT - tree - SLACK - 4096))   # 4 KiB: bundle.env
first=$((room - $(du -sb .gpu/call1/whl | cut -f1)))
[ "$first" -gt $((1 << 20)) ] || { echo "gpu_bundle: the tree ($tree bytes) leaves no room for the GGUF" >&2; exit 2; }
parts=$(( 1 + (size - first + room - 1) / room ))
sum=$(sha256sum "$gguf" | cut -d' ' -f1)
offset=0
for k in $(seq 1 "$parts"); do
  mkdir -p ".gpu/call$k"
  take=$([ "$k" = 1 ] && echo "$first" || echo "$room")
  dd if="$gguf" of=".gpu/call$k/gguf.part" bs=1M iflag=skip_bytes,count_bytes skip="$offset" count="$take" status=none
  offset=$((offset + $(stat -c %s ".gpu/call$k/gguf.part")))
  printf 'PARTS=%s\nSHA256=%s\nGGUF_NAME=%s\n' "$parts" "$sum" "$(basename "$gguf")" > ".gpu/call$k/bundle.env"
done
[ "$offset" = "$size" ] || { echo "gpu_bundle: parts hold $offset of $size bytes" >&2; exit 1; }

echo "tree $((tree >> 20)) MiB + one folder per call (at most $(((LIMIT - tree - SLACK) >> 20)) MiB); the GGUF in $parts parts."
echo "Make these calls back to back (the machine keeps earlier parts only while warm, 30 s after a call):"
for k in $(seq 1 "$parts"); do
  timeout=$([ "$k" = "$parts" ] && echo 570 || echo 120)
  echo "  run(command=\"bash scripts/gpu_check.sh\", carry=[\".gpu/call$k\"], timeout_s=$timeout)   # $(du -sh ".gpu/call$k" | cut -f1)"
done
