"""Organization, Membership and Invitation move here from marketplace in Django's state only:
their tables keep their names (`marketplace_organization`, ...) and their rows. marketplace's
0001-0010 create the tables; marketplace 0011 forgets the models once every foreign key points
here (docs/adr/0019)."""

import django.db.models.deletion
import django.db.models.functions.text
import uuid
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('marketplace', '0010_capacity_idle_and_track_record'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('uuid', models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('role', models.CharField(choices=[('admin', 'Admin'), ('member', 'Member')], default='member', max_length=16)),
                        ('added_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'marketplace_membership',
                        'ordering': ['organization', 'user__username'],
                    },
                ),
                migrations.CreateModel(
                    name='Organization',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('uuid', models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('name', models.CharField(max_length=120)),
                        ('members', models.ManyToManyField(related_name='organizations', through='organizations.Membership', through_fields=('organization', 'user'), to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'marketplace_organization',
                        'ordering': ['name'],
                    },
                ),
                migrations.AddField(
                    model_name='membership',
                    name='organization',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='organizations.organization'),
                ),
                migrations.CreateModel(
                    name='Invitation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('uuid', models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('username', models.CharField(max_length=150)),
                        ('role', models.CharField(choices=[('admin', 'Admin'), ('member', 'Member')], max_length=16)),
                        ('status', models.CharField(choices=[('pending', 'Pending'), ('accepted', 'Accepted'), ('declined', 'Declined'), ('cancelled', 'Cancelled'), ('expired', 'Expired')], default='pending', max_length=16)),
                        ('expires_at', models.DateTimeField()),
                        ('answered_at', models.DateTimeField(blank=True, null=True)),
                        ('invited_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('invitee', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='invitations', to=settings.AUTH_USER_MODEL)),
                        ('organization', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='invitations', to='organizations.organization')),
                    ],
                    options={
                        'db_table': 'marketplace_invitation',
                        'ordering': ['-created_at', 'id'],
                    },
                ),
                migrations.AddConstraint(
                    model_name='organization',
                    constraint=models.UniqueConstraint(django.db.models.functions.text.Lower('name'), name='organization_unique_name_ci'),
                ),
                migrations.AddConstraint(
                    model_name='membership',
                    constraint=models.UniqueConstraint(fields=('organization', 'user'), name='membership_unique_user_per_organization'),
                ),
                migrations.AddConstraint(
                    model_name='membership',
                    constraint=models.CheckConstraint(condition=models.Q(('role__in', ['admin', 'member'])), name='membership_role_valid'),
                ),
                migrations.AddIndex(
                    model_name='invitation',
                    index=models.Index(fields=['invitee', 'status'], name='invitation_invitee_status'),
                ),
                migrations.AddIndex(
                    model_name='invitation',
                    index=models.Index(fields=['organization', 'status'], name='invitation_organization_status'),
                ),
                migrations.AddConstraint(
                    model_name='invitation',
                    constraint=models.UniqueConstraint(condition=models.Q(('status', 'pending')), fields=('organization', 'username'), name='invitation_one_pending_per_username'),
                ),
                migrations.AddConstraint(
                    model_name='invitation',
                    constraint=models.UniqueConstraint(condition=models.Q(('status', 'pending')), fields=('organization', 'invitee'), name='invitation_one_pending_per_invitee'),
                ),
                migrations.AddConstraint(
                    model_name='invitation',
                    constraint=models.CheckConstraint(condition=models.Q(('status__in', ['pending', 'accepted', 'declined', 'cancelled', 'expired'])), name='invitation_status_valid'),
                ),
                migrations.AddConstraint(
                    model_name='invitation',
                    constraint=models.CheckConstraint(condition=models.Q(('role__in', ['admin', 'member'])), name='invitation_role_valid'),
                ),
                migrations.AddConstraint(
                    model_name='invitation',
                    constraint=models.CheckConstraint(condition=models.Q(('status', 'pending'), ('answered_at__isnull', False), _connector='OR'), name='invitation_answered_when_closed'),
                ),
            ],
        ),
    ]
