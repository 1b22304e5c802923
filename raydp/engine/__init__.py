"""Backends that map block indices to :class:`raydp.blocks.BlockResult` values.

An engine knows nothing about privacy: it runs ``PairJob.run_blocks`` on groups of block indices
and yields the results in any order. The reducer in :mod:`raydp.sampler` checks that every block
arrived exactly once.
"""
