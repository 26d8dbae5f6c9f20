# Source on the GPU machine: installs the carried wheels (.whl/) into /tmp/site and puts the checkout on the path.
set -e
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD:/tmp/site:${PYTHONPATH:-}"
export PYTHONUNBUFFERED=1 FIB_SDK_CACHE=/tmp/fib-sdk-cache
set +e
