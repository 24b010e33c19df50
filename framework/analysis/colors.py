"""One distinct colour per run, for any number of runs.

The first ten are Plotly's (and matplotlib's) defaults, so small comparisons
look as they always did. Past ten, a colour is picked from a grid of OKLCH
colours (a perceptual space: equal distances look about equally different)
as the one farthest from every colour already given, so each new run's
colour is as unlike the others as the grid allows. The sequence never
depends on how many runs there are: a run keeps its colour when others
are added (the live dashboard), and colour ``i`` is the same in the report,
the dashboard and the matplotlib overlays.
"""
import functools

DEFAULTS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")
# OKLCH grid: lightness kept readable on white (not too pale) and off black
_LIGHTNESS = (0.42, 0.50, 0.58, 0.66, 0.74)
_CHROMA = (0.07, 0.11, 0.15)
_HUES = 72  # every 5 degrees


def run_colors(count):
    """``count`` distinct ``#rrggbb`` colours: Plotly's ten, then the farthest-first picks."""
    if count <= len(DEFAULTS):
        return list(DEFAULTS[:count])
    hues = _HUES
    while len(colors := _sequence(count, hues)) < count:  # more runs than the grid: finer hues
        hues *= 2
    return list(colors)


@functools.lru_cache(maxsize=8)
def _candidates(hues):
    """The distinct in-gamut grid colours, not among DEFAULTS: ``(hex codes, OKLab array)``."""
    import numpy as np
    lab = []
    for light in _LIGHTNESS:
        for chroma in _CHROMA:
            for step in range(hues):
                angle = 2 * np.pi * step / hues
                lab.append((light, chroma * np.cos(angle), chroma * np.sin(angle)))
    lab = np.array(lab)
    rgb = _oklab_to_srgb(lab)
    codes, keep = [], []
    for index, (inside, code) in enumerate(zip(np.all((rgb >= 0) & (rgb <= 1), axis=1),
                                             (_hex(c) for c in rgb))):
        if inside and code not in DEFAULTS and code not in codes:
            codes.append(code)
            keep.append(index)
    return codes, lab[keep]


@functools.lru_cache(maxsize=8)
def _sequence(count, hues):
    """Up to ``count`` colours: DEFAULTS, then greedy farthest points of the grid in OKLab."""
    import numpy as np
    codes, lab = _candidates(hues)
    taken = _srgb_to_oklab(np.array([_rgb(c) for c in DEFAULTS]))
    nearest = np.min(np.linalg.norm(lab[:, None, :] - taken[None, :, :], axis=2), axis=1)
    chosen = list(DEFAULTS)
    for _ in range(min(count - len(DEFAULTS), len(codes))):
        pick = int(np.argmax(nearest))  # the first of equals: deterministic
        chosen.append(codes[pick])
        nearest = np.minimum(nearest, np.linalg.norm(lab - lab[pick], axis=1))
        nearest[pick] = -1.0  # taken
    return tuple(chosen)


def oklab(color):
    """The OKLab coordinates ``(L, a, b)`` of a ``#rrggbb`` colour (to measure differences)."""
    import numpy as np
    return tuple(float(v) for v in _srgb_to_oklab(np.array([_rgb(color)]))[0])


# -- conversions (Björn Ottosson's OKLab, sRGB with its transfer curve) ------------

def _rgb(color):
    return tuple(int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))


def _hex(rgb):
    return "#" + "".join(f"{int(round(min(max(v, 0.0), 1.0) * 255)):02x}" for v in rgb)


def _srgb_to_oklab(rgb):
    import numpy as np
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    lms = linear @ np.array([[0.4122214708, 0.2119034982, 0.0883024619],
                             [0.5363325363, 0.6806995451, 0.2817188376],
                             [0.0514459929, 0.1073969566, 0.6299787005]])
    return np.cbrt(lms) @ np.array([[0.2104542553, 1.9779984951, 0.0259040371],
                                    [0.7936177850, -2.4285922050, 0.7827717662],
                                    [-0.0040720468, 0.4505937099, -0.8086757660]])


def _oklab_to_srgb(lab):
    import numpy as np
    lms = lab @ np.array([[1.0, 1.0, 1.0],
                          [0.3963377774, -0.1055613458, -0.0894841775],
                          [0.2158037573, -0.0638541728, -1.2914855480]])
    linear = (lms ** 3) @ np.array([[4.0767416621, -1.2684380046, -0.0041960863],
                                    [-3.3077115913, 2.6097574011, -0.7034186147],
                                    [0.2309699292, -0.3413193965, 1.7076147010]])
    clipped = np.clip(linear, 0, None)
    srgb = np.where(clipped <= 0.0031308, 12.92 * clipped, 1.055 * clipped ** (1 / 2.4) - 0.055)
    return np.where(linear < -1e-9, -1.0, srgb)  # out of gamut stays detectable
