"""Regressions and comparisons over the warehouse's runs, with a measured false-alarm rate.

`series` defines what may be compared (the series key) and streams the runs table grouped by
it; `noise` says how much a series moves when nothing changed; `detect` finds changes per
series (ruptures' binary segmentation, the noise model, persistence, a minimum effect);
`compare` answers release-vs-release, provider-vs-baseline and GPU-vs-GPU questions;
`calibration` measures how often the detector is wrong; `publish` writes the answers through
the warehouse's commit protocol; `run` ties them together for the CLI and the flow.
"""
