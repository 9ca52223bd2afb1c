"""BirdNET species detection and the bird-range model behind the birdrange backend."""
