"""`agl verify`: does every output match the committed `dvc.lock`, and if not, why?

A wing of its own, not part of `core`: no DVC stage loads it, so no stage declares it, and an
edit here re-runs nothing (`core`, which every stage declares, once held it, and an edit to
`agl verify` marked all 29 stage instances changed).
"""
