"""Property-based fuzzing of the config layer (issue 22): whatever a config file holds, `config validate`
either accepts it or says one short line, quickly and in bounded memory.

Each generated file goes through :func:`openclaw_dask.cli.config.validate_file`, the function
`openclaw config validate` runs. Per example: no exception other than an ``OpenclawError``, under
2 s, a tracemalloc peak under 200 MB, and an error of one line under 300 characters. The examples
are derandomized (the same ones every run, so CI is deterministic); together the tests below run
:data:`TOTAL` of them. A smaller sample goes through the real ``openclaw run`` in a subprocess.
"""

from __future__ import annotations

import time
import tracemalloc

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openclaw_dask.cli.config import validate_file
from openclaw_dask.config import KEYS
from openclaw_dask.config.schema import SECTIONS
from openclaw_dask.errors import OpenclawError
from tests.conftest import openclaw

BUDGET_S, BUDGET_BYTES, LINE = 2.0, 200 * 2**20, 300
EXAMPLES = {"structured": 2000, "templated": 1500, "raw": 1500}
TOTAL = sum(EXAMPLES.values())  # 5,000 configs per run


def fuzz_settings(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, database=None, deadline=BUDGET_S * 1000, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """One file, rewritten for every example, after the backends' modules are imported (not the config's cost)."""
    path = tmp_path_factory.mktemp("fuzz") / "openclaw_config.yaml"
    for backend in ("thread", "process", "remote", "mpi", "cuda", "kubernetes"):  # imports are not the config's cost
        path.write_text(f"parallel: {{backend: {backend}}}\n")
        try:
            validate_file(path)
        except OpenclawError:
            pass
    return path


def check(path, data: bytes) -> None:
    """Validate ``data`` as a config file within the budget; any error must be one short OpenclawError line."""
    path.write_bytes(data)
    tracemalloc.start()  # only around the validation: tracing hypothesis itself would slow it several times
    start = time.perf_counter()
    error = ""
    try:
        validate_file(path)
    except OpenclawError as e:  # ConfigError, BackendUnavailable: what the CLI prints as one line
        error = str(e)
    finally:
        elapsed, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < BUDGET_S, f"{elapsed:.2f} s for {data[:300]!r}"
    assert peak < BUDGET_BYTES, f"{peak / 2**20:.0f} MB for {data[:300]!r}"
    assert "\n" not in error and "\r" not in error and len(error) < LINE, f"{error[:600]!r} for {data[:300]!r}"


# -- values -----------------------------------------------------------------------------------

UNITS = ["", "B", "kB", "KiB", "MB", "MiB", "GiB", "TiB", "PiB", "EiB", "k", "m", "s", "ms", "h", "d", "us", "elements", "element",
         "lots", "é", "\u00a0MiB"]
number = st.one_of(st.integers(min_value=-(10**30), max_value=10**30), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0, 1, -1, 7, 8, 63, 64, 1024, 2**31, 2**63, 10**400 // 10**390, 65535, 65536]))
number_text = st.one_of(number.map(str), st.sampled_from(["", " ", ".", "1e400", "-0", "1_000", "0x10", "1.5", "nan", ".inf",
                                                           "1e-400", "٣", "١٢٣", "1" * 50, "1" * 4400]))
def _join(*parts: object) -> str:
    return "".join(map(str, parts))


unit_text = st.builds(_join, number_text, st.sampled_from(["", " ", "  ", "\t"]), st.sampled_from(UNITS))
CHOICES = ["auto", "thread", "process", "remote", "mpi", "cuda", "kubernetes", "serial", "data", "model", "pipeline", "tcp",
           "tls", "ucx", "nccl", "gloo", "inproc", "debug", "INFO", "npy", "zarr", "hdf5", "error", "fill", "threads",
           "distributed", "ClusterIP", "null", "~", "yes", "no", "on", "off", "127.0.0.1", "0.0.0.0", "::1", "lo", "eth0",
           "tcp://127.0.0.1:8786", "tcp://127.0.0.1", "localhost:0", "8787", "99999", "/tmp", "a\x00b", "\u202e", "😀" * 30]
scalar = st.one_of(st.none(), st.booleans(), number, unit_text, st.sampled_from(CHOICES), st.text(max_size=20))
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.sampled_from(CHOICES), inner, max_size=3)), max_leaves=6)
KEY_NAMES = [k.name for k in KEYS]
name = st.one_of(st.sampled_from(KEY_NAMES), st.text(max_size=10), st.sampled_from(["", "<<", "dask", "null", "1", "true"]))


# -- 1. structured: mappings of known and unknown sections and keys, dumped by PyYAML -----------

section_body = st.one_of(st.dictionaries(name, value, max_size=5), value)
config_dict = st.dictionaries(st.one_of(st.sampled_from(SECTIONS), st.text(max_size=8)), section_body, max_size=4)


@pytest.mark.parametrize("n", [EXAMPLES["structured"]])
def test_structured_configs(target, n):
    @fuzz_settings(n)
    @given(config_dict, st.booleans())
    def run(cfg, flow):
        try:
            text = yaml.safe_dump(cfg, allow_unicode=True, default_flow_style=flow, sort_keys=False)
        except (yaml.YAMLError, ValueError):  # something PyYAML cannot write (e.g. a lone surrogate)
            return
        check(target, text.encode("utf-8", "surrogatepass"))

    run()


# -- 2. templated: YAML text with anchors, aliases, tags, nesting, duplicates, bombs ---------------

def nested(depth: int, open_: str, close: str, inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


def flat_list(n: int) -> str:
    return "[" + ", ".join(["1"] * n) + "]"


def bomb(width: int, levels: int, where: str) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{where}: *a{levels - 1}\n"


RAW_VALUES = st.one_of(
    unit_text, number_text, st.sampled_from(CHOICES),
    st.sampled_from(['!!float "abc"', "!!int 0xZZ", "!!int ''", "!!timestamp x", "!!timestamp 2024-13-45", "!!binary '@@@'",
                     "!!bool maybe", "!!null x", "!!set {a, b}", "!!omap [a: 1]", "!!python/object:os.system x", "!foo bar",
                     '"\\0"', '"\\x85"', '"\\ud800"', "'''", '"', "[", "{", "]", "}", "&", "*", "*undefined", "&a",
                     "&a [*a]", "&a {x: *a}", "|", ">", "|-\n  x", "? x", "- 1", ": 1", "@x", "`x", "%YAML 1.1",
                     "2024-01-01", "2024-13-45", "1_000", "0o777", "0b101", "+.inf", "-.inf", ".nan", "1e400 elements",
                     "10:30", "190:20:30", "''", '""', "~"]),
    st.builds(nested, st.integers(1, 60), st.just("["), st.just("]")),
    st.builds(nested, st.integers(1, 60), st.just("{a: "), st.just("}")),
    st.builds(nested, st.integers(900, 1100), st.just("["), st.just("]")),
    st.builds(flat_list, st.integers(0, 50)),
)
LARGE = st.builds(flat_list, st.sampled_from([9_990, 10_001, 12_000]))  # near the 10,000-value bound: drawn rarely


@st.composite
def templated(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        section = draw(st.one_of(st.sampled_from(SECTIONS), st.text(max_size=8)))
        keys = draw(st.lists(st.tuples(name, RAW_VALUES), max_size=5))
        if draw(st.booleans()):
            body = "".join(f"\n  {k}: {v}" for k, v in keys) or " {}"
        else:
            body = " {" + ", ".join(f"{k}: {v}" for k, v in keys) + "}"
        parts.append(f"{section}:{body}")
    if draw(st.booleans()):  # an anchor, then aliases to it elsewhere (also self-references)
        parts.insert(0, f"base: &b {{{draw(name)}: {draw(RAW_VALUES)}}}")
        parts.append(draw(st.sampled_from(["dask: *b", "parallel: *b", "dask: {<<: *b, x: 1}", "parallel: {<<: *b}",
                                           "dask: &b2 {x: *b2}", "dask: {a: *b, b: *b, c: *b}"])))
    if draw(st.booleans()):  # an alias or list bomb, small or large
        parts.append(bomb(draw(st.integers(1, 12)), draw(st.integers(1, 10)),
                          draw(st.sampled_from(["dask", "x", "parallel"]))))
    if draw(st.integers(0, 49)) == 0:  # a value near the node bound (slow under tracemalloc, so rare)
        parts.append(f"dask: {{big: {draw(LARGE)}}}")
    if draw(st.booleans()):  # a duplicate, at the top or nested
        parts.append(draw(st.sampled_from(parts)))
    text = "\n".join(parts) + "\n"
    if draw(st.booleans()):  # an edit anywhere: a junk character or a cut
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(["", "\x00", "\t", ":", "\ufeff", "\x85", "\u2028", "&x", "*x", "!!"])) + text[i:]
    return text


@pytest.mark.parametrize("n", [EXAMPLES["templated"]])
def test_templated_configs(target, n):
    @fuzz_settings(n)
    @given(templated())
    def run(text):
        check(target, text.encode("utf-8", "surrogatepass"))

    run()


# -- 3. raw: binary junk, other encodings, random unicode -----------------------------------------

raw = st.one_of(
    st.binary(max_size=2000),
    st.builds(str.encode, st.text(max_size=500), st.just("utf-8"), st.just("surrogatepass")),
    st.builds(str.encode, st.text(max_size=200), st.just("utf-16"), st.just("surrogatepass")),
    st.builds(bytes.__add__, st.sampled_from([b"parallel:\n  workers: ", b"dask: ", b"\xef\xbb\xbf", b""]), st.binary(max_size=200)),
)


@pytest.mark.parametrize("n", [EXAMPLES["raw"]])
def test_raw_bytes(target, n):
    @fuzz_settings(n)
    @given(raw)
    def run(data):
        check(target, data)

    run()


# -- the real CLI, on a sample --------------------------------------------------------------------

SAMPLE = 30
plausible_value = st.one_of(unit_text, st.sampled_from(CHOICES), st.integers(-2, 70_000), st.booleans(), st.none())


@st.composite
def plausible(draw) -> str:
    """A config of real keys with values of the right shape or close to it: many load, and those run."""
    cfg: dict = {}
    for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)):
        cfg.setdefault(key.section, {})[key.name] = draw(plausible_value)
    return yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False)


@pytest.mark.slow
def test_a_sample_through_openclaw_run(tmp_path):
    """30 generated configs (derandomized: 20 of real keys, 10 templated) through `openclaw run`: exit 0, or 2 with one line."""
    configs: list[str] = []

    @settings(max_examples=SAMPLE, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(plausible(), plausible(), templated()))
    def collect(text):
        configs.append(text)

    collect()
    path = tmp_path / "c.yaml"
    codes = []
    for text in configs[:SAMPLE]:
        # Serial and tiny, so a config that is valid runs in a moment.
        path.write_text(text + "\n", encoding="utf-8", errors="surrogatepass")
        start = time.perf_counter()
        r = openclaw("run", "array-sum", "--config", str(path), "--size", "1MiB", "--set", "parallel.enabled=false",
                     "--set", "workload.repeat=1", "--set", "workload.straggler=0", cwd=tmp_path, timeout=60)
        assert time.perf_counter() - start < 20, text[:300]
        assert "Traceback" not in r.stderr, (text[:300], r.stderr[-2000:])
        if r.returncode:
            lines = [line for line in r.stderr.splitlines() if line.strip()]
            assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("openclaw: error: "), (text[:300], r.stderr[-2000:])
            assert len(lines[0]) < LINE + len("openclaw: error: ")
        codes.append(r.returncode)
    assert len(codes) == SAMPLE and codes.count(0) >= 3, codes  # some of the sample ran for real
