"""Small offline datasets the notebooks train on, installed with the helper package as `dlkit.data`.

Nothing is downloaded at run time: each file here is shipped with the kit, and
`dlkit.data_file(name)` returns its path wherever dlkit is installed.
"""
