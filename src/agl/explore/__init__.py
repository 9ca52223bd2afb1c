"""The clip explorer (`agl explore`): every run's guess, reasoning and counterfactual beside
the sound, one clip at a time.

`sources` reads what the pipeline wrote (manifest, runs, birds, speech, perturb/listen) and
notes what is missing; `payload` turns it into the page's data (the clip list as columns, one
clip's details); `spectrogram` draws a clip's picture; `server` serves the page locally like
`agl play`; `export` writes the same files to a folder that opens from disk. The page itself
is static HTML/JS/CSS in `static/`: it loads its data as script files (`data/*.js`), so the
same code runs served and from `file://`.
"""
