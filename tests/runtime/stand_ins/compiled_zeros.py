"""Test stand-in for a miscompiled kernel: claims every call and returns zeros.

Copied over ``mamba_ssm/_families/selective_scan/compiled.py`` in a package copy (test_doctor_report.py).
"""


def supports(u, delta, A, B, C, D, z, delta_bias, delta_softplus=False, return_last_state=False):
    return None


def selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state):
    out = u * 0.0
    if return_last_state:
        return out, u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    return out
