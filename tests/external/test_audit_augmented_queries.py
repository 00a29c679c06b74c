"""`miaudit audit` on a plain-query bank (its default, signals.queries [plain]) refuses
augmentation-consistency listed explicitly, with the reason, before any work, instead of
reporting a copy of correctness (the default list leaves it out with the reason)."""


from miaudit.cli.main import main


def test_audit_refuses_augmentation_consistency_on_one_query(user, tmp_path, capsys):
    out = tmp_path / "fn"
    assert main(["audit", "--predict", f"{user['nets']}:predict_proba", "--data", "digits",
                 "--members", str(user["members"]), "--nonmembers", str(user["nonmembers"]),
                 "--out", str(out), "--quiet",
                 "--attacks", "correctness,augmentation-consistency"]) == 2
    err = capsys.readouterr().err
    assert ("attack 'augmentation-consistency' cannot run: needs at least 1 augmented query "
            "per sample beyond the plain one") in err
    assert "this audit queries ['plain']" in err
    assert not out.exists()
