"""The wire both sides speak: frames, the data-only codec, views of one buffer, the one prefork server."""
