"""Where the AudioSet ontology comes from: a pinned commit of its public repository and the
file's SHA-256. agl.curation.ontology reads it and `agl shared` (agl.dataset.shared_data)
fetches it; the pin sits on the dataset floor so neither imports the other."""

ONTOLOGY_URL = (
    "https://raw.githubusercontent.com/audioset/ontology/"
    "d417d32bf59c711abb5910fd2f76a0eb44697991/ontology.json"
)
ONTOLOGY_SHA256 = "9c685f4403eecc3ca9be37fd7285cf212feaaea6ff7229d3e7ca89e0d1f2d15d"
