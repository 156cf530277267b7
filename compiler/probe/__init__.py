"""The probe: sentinel conversations rendered and diffed into a ProtocolSpec.

    conversations  the turns it renders and the input shapes it retries them in
    spans          text diffing that respects marker boundaries
    renders        render a turn after a fixed history; a span and its layout
    arguments      how a call's arguments are written
    calls          the call layout, the section around the calls, the separator
    modes          the generation prompt's modes (thinking on / off)
    markers        reasoning, content wrapper, end of turn, start states, from the layouts
    wrappers       tokens the template writes only before another kind of call (its code)
    instructions   what the template's tool instructions tell the model to write, where history
                   renders otherwise
    overrides      declarative patches for what no render can show (family_overrides/)
    derive         both sentinel sets, agreement, the spec
    verify         the spec re-renders the standard turns with fresh values
    report         the report `tplparse probe` prints and each generated module carries
"""

from .derive import PLACEHOLDER_TOKENS, PROBE_SECONDS, probe
from .verify import Check, standard_turns, verify

__all__ = ["Check", "PLACEHOLDER_TOKENS", "PROBE_SECONDS", "probe", "standard_turns", "verify"]
