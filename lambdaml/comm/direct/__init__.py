"""The direct channel's communication: workers exchange values over authenticated TCP links with
each other, set up by plain connect or simultaneous open (hole punching) from the endpoints they
publish in the rendezvous store, and fall back to the store per pair where a link cannot be had.
"""
