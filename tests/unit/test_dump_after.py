"""`wgc check --dump-after PASS` stops the pipeline after PASS and prints the IR."""

from click.testing import CliRunner

from wgc.cli import main

BROKEN = """
node A: stateless {
  impl "m:A"
  in  x: f32[2]
  out y: f32[2]
}
walk w(x) {
  A(x) -> y
  emit y as tensor
}
"""


def test_dump_after_prints_ir_and_stops_early(tmp_path):
    f = tmp_path / "m.walk"
    f.write_text(BROKEN)  # no flow: WG701/WG706 come from the `flows` pass, after `dataflow`
    runner = CliRunner()
    full = runner.invoke(main, ["check", "--format", "json", str(f)])
    early = runner.invoke(main, ["check", "--dump-after", "dataflow", str(f)])
    assert "WG706" in full.output
    assert "# IR of" in early.stdout and "walk w(x" in early.stdout
    assert "WG706" not in early.output


def test_dump_after_unknown_pass_is_a_user_error(tmp_path):
    f = tmp_path / "m.walk"
    f.write_text(BROKEN)
    result = CliRunner().invoke(main, ["check", "--dump-after", "nmes", str(f)])
    assert result.exit_code == 1
    assert "did you mean `names`" in result.output
