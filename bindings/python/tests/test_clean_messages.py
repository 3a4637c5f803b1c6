"""A message the library gives Python (an exception's text, from mtls_last_error) is one line with
no control, separator or bidirectional character, whatever outside text it quotes (issue 41
item 4): a program may print or log it as it is."""
import json

import pytest

import mtls

UNSAFE = [chr(c) for c in list(range(0x20)) + list(range(0x7F, 0xA0))] + \
    ["\u2028", "\u2029", "\u061c", "\u200e", "\u200f"] + [chr(c) for c in range(0x202A, 0x202F)] + \
    [chr(c) for c in range(0x2066, 0x206A)]


def test_an_error_quoting_a_hostile_key_is_one_clean_line():
    key = "bogus\x1b[2J\u009b1m\u202e\u2066\r\nforged\u2028line"
    with pytest.raises(mtls.InvalidPolicy) as e:
        mtls.Policy.from_json(json.dumps({key: 1}))
    message = str(e.value)
    assert "bogus" in message and "forged" in message, message
    assert not [c for c in message if c in UNSAFE], repr(message)
