"""HLO text: grammar-driven parser, typed IR, attribute decoding, printer."""
