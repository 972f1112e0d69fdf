"""TEST DOUBLE: the part of ``sglang.srt`` the collection's server-args gate imports."""
