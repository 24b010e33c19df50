"""Groups of runs: runs that share the values of some config fields, their
statistics and whether a difference between two groups is real.

``compare(runs, group_by=...)`` and ``history(runs, metric, group_by=...)``
(:mod:`.reports`) hand their per-run tables to :func:`group_table` and
:func:`group_history`. Each numeric outcome gets its mean, its sample
standard deviation (ddof 1) and the 95 % t-interval of the mean
(mean +- t(0.975, n-1) * std / sqrt(n)); with a baseline group
(``against``) each group also gets the difference of its mean to the
baseline's with a 95 % interval, the p-value of a t-test (paired on the
runs' ``seed`` when both groups hold the same seeds, Welch's otherwise) and
that p-value corrected for the number of groups compared (Holm).

A value missing in a run (NaN: a run that stopped before its first
evaluation) counts in ``n`` (the runs of the group) but not in that
outcome's statistics.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from ..errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

AUTO = "auto"
SEED = "seed"           # never a group field under "auto": seeds are the repetitions
N = "n"                 # the runs in a group (or reaching a step, in a grouped history)
TEST = "test"           # "paired" or "welch": the test of a group against the baseline
LEVEL = 0.95
# compare() columns that are numbers but no outcome of the run's training
_NOT_OUTCOMES = ("trial", "dirty")


def group_fields(group_by: str | Sequence[str], fields: Sequence[str],
                 differing: Sequence[str]) -> list[str]:
    """The config fields to group by: ``group_by`` checked against ``fields``
    (every config field of the runs), or, for ``"auto"``, those of
    ``differing`` (the fields whose values differ) except ``seed``. An empty
    list means one group of every run. ConfigError names the accepted fields."""
    if group_by == AUTO:
        return [f for f in differing if f != SEED]
    names = [group_by] if isinstance(group_by, str) else list(group_by) \
        if isinstance(group_by, (list, tuple)) else None
    accepted = f"'auto' or config fields of the runs: {', '.join(fields)}"
    if not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"group_by must be {accepted}. Received: group_by={group_by!r}",
                          field="group_by")
    for name in names:
        if name not in fields:
            raise ConfigError(f"cannot group by {name!r}: not a config field of these runs; "
                              f"accepted: {accepted}. Received: group_by={group_by!r}",
                              field="group_by")
    return list(dict.fromkeys(names))


def outcome_columns(table: pd.DataFrame, skip: Sequence[str] = ()) -> list[str]:
    """compare()'s numeric outcome columns (losses, steps, times, eval columns,
    final parameter values and their errors): not config fields, nor identity."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype
    config = set(table.attrs.get("config_columns", ())) | set(skip) | set(_NOT_OUTCOMES)
    return [c for c in table.columns if c not in config and is_numeric_dtype(table[c])
            and not is_bool_dtype(table[c])]


def group_table(table: pd.DataFrame, columns: Sequence[str],
                against: Any = None) -> pd.DataFrame:
    """One row per group of compare()'s per-run ``table``: the group's
    ``columns`` (config columns), ``n``, and per outcome ``m``: ``m_mean``,
    ``m_std``, ``m_ci_low``, ``m_ci_high``; with ``against`` (the baseline
    group's value, or ``{column: value}`` for several columns) also
    ``test`` (``paired``, ``welch``, ``baseline``, or empty: no test),
    ``m_diff``, ``m_diff_ci_low``, ``m_diff_ci_high``, ``m_p`` and
    ``m_p_holm`` (NaN for the baseline itself and for a group of fewer than
    two values). ``attrs``: ``group_by``, ``outcomes``, ``against``."""
    import pandas as pd
    columns = list(columns)
    metrics = outcome_columns(table, skip=columns)
    keys = _key_frame(table, columns)
    members = keys.groupby(list(keys.columns), sort=False, dropna=False).indices
    stats = _describe(table[metrics], keys)
    out = stats.index.to_frame(index=False)
    out.columns = columns or ["group"]
    parts = {N: [len(members[group]) for group in stats.index]}
    parts.update((f"{m}_{part}", stats[(m, part)].to_numpy())
                 for m in metrics for part in ("mean", "std", "ci_low", "ci_high"))
    out = pd.concat([out, pd.DataFrame(parts, index=out.index)], axis=1)
    if against is not None:
        baseline = _baseline(against, columns, list(stats.index))
        out = _with_tests(out, table, members, list(stats.index), metrics, baseline)
    out.attrs.update(group_by=columns, outcomes=metrics, against=against)
    return out


def _key_frame(table, columns):
    """The group key of every run, as a frame (a constant key for one group)."""
    import pandas as pd
    if not columns:
        return pd.DataFrame({"group": ["all runs"] * len(table)}, index=table.index)
    return table[columns].map(_hashable)


def _describe(values, keys):
    """Per group (in order of the key values) and metric: mean, std, ci_low, ci_high."""
    import numpy as np
    import pandas as pd
    from scipy import stats
    grouped = values.groupby([keys[c] for c in keys.columns], sort=False, dropna=False)
    mean, std, count = grouped.mean(), grouped.std(ddof=1), grouped.count()
    order = _sorted_index(mean.index)
    mean, std, count = mean.loc[order], std.loc[order], count.loc[order]
    with np.errstate(invalid="ignore", divide="ignore"):
        half = stats.t.ppf(0.5 + LEVEL / 2, count - 1) * std / np.sqrt(count)
    half = half.where(count >= 2)
    parts = {"mean": mean, "std": std.where(count >= 2), "ci_low": mean - half,
             "ci_high": mean + half}
    if not len(values.columns):
        return pd.DataFrame(index=mean.index)
    return pd.concat(parts, axis=1).swaplevel(axis=1)


def _sorted_index(index):
    """The groups in the order of their values (as text when they do not compare)."""
    try:
        return index.sort_values()
    except TypeError:
        return index[sorted(range(len(index)), key=lambda i: str(index[i]))]


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value


def _baseline(against, columns, groups):
    """The group key ``against`` names; ConfigError listing the groups."""
    if len(columns) > 1:
        if not isinstance(against, Mapping) or sorted(against) != sorted(columns):
            raise ConfigError(f"against must be a dict of the group fields ({', '.join(columns)}) "
                              f"when grouping by several. Received: against={against!r}",
                              field="against")
        wanted = tuple(against[c] for c in columns)
    elif len(columns) == 1:
        wanted = (against[columns[0]] if isinstance(against, Mapping) and
                  list(against) == columns else against,)
    else:
        raise ConfigError(f"against needs group_by: a baseline is one of the groups. "
                          f"Received: against={against!r}", field="against")
    keys = [g if isinstance(g, tuple) and len(columns) > 1 else (g,) for g in groups]
    for group, key in zip(groups, keys):
        if all(_same(a, b) for a, b in zip(key, wanted)):
            return group
    listed = "; ".join(", ".join(map(str, k)) for k in keys)
    raise ConfigError(f"no group has {', '.join(columns)} = {', '.join(map(str, wanted))}; "
                      f"the groups: {listed}. Received: against={against!r}", field="against")


def _same(value, wanted):
    if value == wanted:
        return True
    numbers = (int, float)
    if isinstance(value, numbers) and isinstance(wanted, numbers) and \
            not isinstance(value, bool) and not isinstance(wanted, bool):
        return float(value) == float(wanted)
    return str(value) == str(wanted)


def _with_tests(out, table, members, groups, metrics, baseline):
    """``out`` with the test columns of each group against ``baseline``;
    ``members``: each group's row positions in ``table``."""
    import numpy as np
    import pandas as pd
    seeds = table[SEED] if SEED in table.columns else None
    values = table[metrics].to_numpy(float)   # once: a column read per test cost 1.5 ms
    tests, found = [], []
    for group in groups:
        kind, results = ("baseline", None) if group == baseline else \
            _test_group(values, seeds, members[group], members[baseline])
        tests.append(kind if min(len(members[group]), len(members[baseline])) >= 2 else "")
        found.append(np.full((4, len(metrics)), np.nan) if results is None else results)
    stacked = np.stack(found) if found else np.empty((0, 4, len(metrics)))  # group, part, metric
    added: dict[str, Any] = {TEST: tests}
    for j, m in enumerate(metrics):
        added.update({f"{m}_{name}": stacked[:, k, j] for k, name in enumerate(_TEST_PARTS)})
        added[f"{m}_p_holm"] = holm(stacked[:, 3, j])
    return pd.concat([out, pd.DataFrame(added, index=out.index)], axis=1)


_TEST_PARTS = ("diff", "diff_ci_low", "diff_ci_high", "p")


def _test_group(values, seeds, rows, base_rows):
    """``(kind, results)`` of one group against the baseline: ``paired`` when
    both hold the same seeds (each once), else ``welch``; ``results``: rows
    diff, diff_ci_low, diff_ci_high, p by columns of ``values`` (the metrics)."""
    import numpy as np
    paired = seeds is not None and _same_seeds(seeds.iloc[rows], seeds.iloc[base_rows])
    if paired:   # matched by seed, never by the order of the runs
        rows = rows[seeds.iloc[rows].to_numpy().argsort(kind="stable")]
        base_rows = base_rows[seeds.iloc[base_rows].to_numpy().argsort(kind="stable")]
    # a missing value (or an infinity) leaves out its run, or its pair, in that metric only
    a, b = (np.where(np.isfinite(v), v, np.nan) for v in (values[rows], values[base_rows]))
    with np.errstate(invalid="ignore", divide="ignore"), _quiet():
        results = (paired_test if paired else welch_test)(a, b)
    return ("paired" if paired else "welch"), results


def paired_test(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows diff, ci_low, ci_high, p of ``a - b`` over pairs, a column each (2-D
    arrays, row i of both = the same seed); pairs with a NaN are left out; NaN
    interval and p below two pairs."""
    import numpy as np
    from scipy import stats
    d = a - b
    n = np.isfinite(d).sum(axis=0)
    diff = np.nanmean(d, axis=0)
    half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * np.nanstd(d, axis=0, ddof=1) / np.sqrt(n)
    p = stats.ttest_rel(a, b, axis=0, nan_policy="omit").pvalue
    return np.array([diff, diff - half, diff + half, np.where(n >= 2, p, np.nan)])


def welch_test(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows diff, ci_low, ci_high, p of mean(a) - mean(b) by Welch's t-test
    (unequal variances), a column each; NaN values are left out; NaN interval
    and p when a side holds fewer than two values."""
    import numpy as np
    from scipy import stats
    na, nb = np.isfinite(a).sum(axis=0), np.isfinite(b).sum(axis=0)
    va = np.nanvar(a, axis=0, ddof=1) / na
    vb = np.nanvar(b, axis=0, ddof=1) / nb
    se = np.sqrt(va + vb)
    diff = np.nanmean(a, axis=0) - np.nanmean(b, axis=0)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    half = np.where(se == 0, 0.0, stats.t.ppf(0.5 + LEVEL / 2, df) * se)
    p = stats.ttest_ind(a, b, axis=0, equal_var=False, nan_policy="omit").pvalue
    return np.array([diff, diff - half, diff + half, np.where(se > 0, p, np.nan)])


def _same_seeds(a, b):
    values = [list(s) for s in (a, b)]
    if any(s.isna().any() for s in (a, b)) or any(len(set(v)) < len(v) for v in values):
        return False
    return sorted(values[0]) == sorted(values[1])


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """scipy warns of precision loss when a group's values are (nearly) all
    equal; the p-value says as much, and a table is no place for a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down correction of ``pvalues`` (NaN stays NaN and does not
    count): the i-th smallest of m p-values becomes max over j <= i of
    min(1, (m - j + 1) * p_(j))."""
    finite = sorted((p, i) for i, p in enumerate(pvalues) if p == p)
    adjusted = [math.nan] * len(pvalues)
    running, m = 0.0, len(finite)
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def group_history(long: pd.DataFrame, metric: str, columns: Sequence[str]) -> pd.DataFrame:
    """Per group and step of history()'s long table: ``n`` (the runs that
    logged that step), ``<metric>_mean``, ``<metric>_std``,
    ``<metric>_ci_low``, ``<metric>_ci_high`` (95 % t-interval)."""
    import numpy as np
    from scipy import stats
    keys = [*columns, "step"]
    grouped = long.groupby(keys, sort=True, dropna=False, observed=True)[metric]
    out = grouped.agg(["count", "mean", "std"]).reset_index()
    count = out["count"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        half = stats.t.ppf(0.5 + LEVEL / 2, count - 1) * out["std"].to_numpy() / np.sqrt(count)
    half = np.where(count >= 2, half, np.nan)
    out = out.rename(columns={"count": N, "mean": f"{metric}_mean", "std": f"{metric}_std"})
    out[f"{metric}_ci_low"] = out[f"{metric}_mean"] - half
    out[f"{metric}_ci_high"] = out[f"{metric}_mean"] + half
    out.attrs.update(group_by=list(columns), metric=metric)
    return out
