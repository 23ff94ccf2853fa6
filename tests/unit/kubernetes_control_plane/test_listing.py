"""One way to name the first few of a list in a status line and count the rest."""

from listing import shown


def test_the_first_three_then_how_many_more_and_what_they_are():
    units = [f"w/{i}" for i in range(5)]
    assert shown(units[:3]) == "w/0; w/1; w/2"
    assert shown(units) == "w/0; w/1; w/2 and 2 more"
    assert shown(units, 4, sep=", ") == "w/0, w/1, w/2, w/3 and 1 more"
    assert shown(units, more="MIG report(s) refused") == (
        "w/0; w/1; w/2 and 2 more MIG report(s) refused"
    )
    assert shown([]) == ""
