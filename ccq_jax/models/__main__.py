"""CLI: print the parameter count of model presets (`python -m ccq_jax.models [NAME ...] [--set FIELD=VALUE ...]`).

Counts come from shapes only (`jax.eval_shape`), so even the 1.3B presets take about a second.
"""

import argparse

from ccq_jax import configlib
from ccq_jax.models.params import count_params
from ccq_jax.models.presets import PRESETS, get_config


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="ccq-models", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"presets (default: all): {', '.join(PRESETS)}")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field, e.g. --set vocab_size=50304 --set ccq.mode=fixed")
    args = parser.parse_args(argv)
    try:
        overrides = configlib.parse_overrides(args.overrides)
        configs = {name: get_config(name, **overrides) for name in args.names or PRESETS}
    except ValueError as err:
        parser.error(str(err))
    print(f"{'preset':<20} {'family':<12} {'layers':>6} {'width':>6} {'parameters':>16}")
    for name, cfg in configs.items():
        n = count_params(cfg)
        print(f"{name:<20} {cfg.family:<12} {cfg.num_hidden_layers:>6} {cfg.hidden_size:>6} {n:>16,} "
              f"({n / 1e6:,.1f}M)")


if __name__ == "__main__":
    main()
