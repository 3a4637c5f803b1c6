"""examples/README-curl.md says what examples/curl_fetch.c does (issue 38, item 7): every line of
its C excerpt is a line of the example (which test_tls.py and test_trust_peer.py build and run
against openssl s_server, with --verify-as), and it names the four parts of the recipe."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples")


def test_the_curl_recipe_quotes_the_example_as_it_is():
    text = open(os.path.join(EXAMPLES, "README-curl.md")).read()
    source = {line.strip() for line in open(os.path.join(EXAMPLES, "curl_fetch.c"))}
    block = text.split("```c\n", 1)[1].split("```", 1)[0]
    quoted = [line.strip() for line in block.splitlines() if line.strip() not in ("", "...", "}")]
    assert quoted and all(line in source for line in quoted), [line for line in quoted if line not in source]
    for part in ("CURLOPT_SSL_CTX_FUNCTION", "mtls_ssl_ctx_configure", "mtls_ssl_ctx_set_peer",
                 "CURLOPT_SSL_VERIFYHOST"):
        assert part in block and part in text.split("```c", 1)[0], part
