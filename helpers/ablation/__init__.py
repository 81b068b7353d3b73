"""Chapter 10, ablation: switch attention off (three ways that agree to the last bit), remove
single heads, measure what each removal breaks, and compare where a head looks with what it does.

compute.py holds the functions (the Primer's Appendix A methods, the tables' rows, the explorer's
view); checks.py the exercise checks; explorer.py the widget (a checkbox per head, attention off).
"""
