import json
import subprocess


def test_cert_show_json_reads_a_pem(tmp_path, cli):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", tmp_path / "k.pem", "-out", tmp_path / "c.pem",
                    "-subj", "/CN=e2e.example", "-days", "1"], check=True, capture_output=True)
    r = cli("cert", "show", tmp_path / "c.pem", "--json")
    assert r.returncode == 0, r.stderr
    [c] = json.loads(r.stdout)
    assert c["subject_cn"] == "e2e.example" and c["key_type"] == "p256"


def test_cert_show_missing_file_is_one_line_and_nonzero(cli):
    r = cli("cert", "show", "/nonexistent.pem")
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1
