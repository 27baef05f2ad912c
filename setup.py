"""The packages: tiering_core and spark_apps at the top, tiering_airflow in Airflow's plugins folder.

Everything else is in setup.cfg, whose package_dir maps tiering_airflow to plugins/tiering_airflow;
setup.cfg's ``find:`` searches a single folder, so the two searches are written here.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["tiering_core", "tiering_core.*", "spark_apps", "spark_apps.*"]),
        *find_packages("plugins", include=["tiering_airflow", "tiering_airflow.*"]),
    ],
)
