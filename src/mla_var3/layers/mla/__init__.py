"""The MLA layer: dense decode (decode.py), FlashMLA peer rows (peers.py)."""
